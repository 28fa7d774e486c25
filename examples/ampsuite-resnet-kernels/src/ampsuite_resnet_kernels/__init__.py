"""ampsuite-resnet-kernels: techniques for the shapes of ResNet-50's stem and batch norms.

* ``stem-pad`` (:mod:`ampsuite_resnet_kernels.stem_pad`): images and the first convolution padded with zero
  channels, 3 -> 4, so that cuDNN's NHWC kernels need no padding of their own.
* ``maxpool-offsets`` (:mod:`ampsuite_resnet_kernels.maxpool_offsets`): a max pool that saves each window's
  winner as an int8 offset for a gather backward, under torch.compile.
* ``persistent-batch-norm`` (:mod:`ampsuite_resnet_kernels.persistent_batch_norm`): training batch norm + ReLU
  as one persistent Triton kernel a pass.
* ``cudnn-batch-norm`` (:mod:`ampsuite_resnet_kernels.cudnn_batch_norm`): cuDNN's batch norm kept whole under
  torch.compile, optionally with the ReLU and residual add fused into it through cuDNN's Ex calls (ctypes).

ampsuite finds them through the ``ampsuite`` entry points in pyproject.toml; nothing here is imported by
ampsuite except through them. Each registered module is torch-free; the torch-dependent halves (the modules
whose names start with ``_``) are imported when a cell applies the technique.
"""

__version__ = "0.1.0"
