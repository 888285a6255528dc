"""Write a real Lightning ``Trainer`` checkpoint: ``python lightningchild.py OUT.ckpt DIR``.

A tiny LightningModule (hyper-parameters saved, a buffer), one epoch of two batches on
the CPU with Adam and a step scheduler, a ``ModelCheckpoint`` callback; then
``trainer.save_checkpoint(OUT)``. Run in a child process by the tests (Lightning and
its training loop stay out of the test process).
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset


class Regressor(pl.LightningModule):
    """Two linear layers and a buffer; its hyper-parameters go into the checkpoint."""

    def __init__(self, width: int = 4, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(3, width), torch.nn.ReLU(), torch.nn.Linear(width, 1)
        )
        self.register_buffer("seen", torch.zeros(1))

    def training_step(self, batch: Any, index: int) -> Any:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, 1)]


def main(out: str, folder: str) -> None:
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(8, 3), torch.randn(8, 1)), batch_size=4)
    trainer = pl.Trainer(
        max_epochs=1,
        limit_train_batches=2,
        accelerator="cpu",
        logger=False,
        callbacks=[ModelCheckpoint(dirpath=folder)],
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=folder,
    )
    trainer.fit(Regressor(), data)
    trainer.save_checkpoint(out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
