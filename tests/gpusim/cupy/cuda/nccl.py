"""cupy.cuda.nccl without libnccl, as the cupy wheel imports on a machine without NCCL: the module
exists, ``available`` is False and the communicator functions are missing."""
available = False
