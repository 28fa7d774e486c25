"""The torch-dependent part of :mod:`ampsuite.plugins.workloads.vit` (imported on first use)."""

from __future__ import annotations

import torch
from torch import nn
from torchvision.models.vision_transformer import VisionTransformer

from ampsuite import BuildContext, TrainStep
from ampsuite.plugins.workloads._data import POOL_BATCHES, cycling, device_pool, image_collate, synthetic_images
from ampsuite.plugins.workloads._optim import trained_step
from ampsuite.plugins.workloads.vit import ViTOptions


def make_model(options: ViTOptions) -> VisionTransformer:
    return VisionTransformer(
        image_size=options.image_size,
        patch_size=options.patch_size,
        num_layers=options.layers,
        num_heads=options.heads,
        hidden_dim=options.hidden,
        mlp_dim=options.mlp,
        dropout=options.dropout,
        attention_dropout=options.dropout,
        num_classes=options.classes,
    )


def build(options: ViTOptions, ctx: BuildContext) -> TrainStep:
    torch.manual_seed(ctx.seed)
    model = make_model(options).to(ctx.device)
    dataset = synthetic_images(POOL_BATCHES * ctx.batch_size, options.image_size, options.classes, ctx.seed)
    pool = device_pool(dataset, ctx.batch_size, image_collate, ctx.device, POOL_BATCHES)
    loss_fn = nn.CrossEntropyLoss()
    return trained_step(
        ctx,
        options,
        model,
        data=cycling(pool),
        loss_fn=loss_fn,
        dataset=dataset,
        collate=image_collate,
        blocks="encoder.layers",
    )
