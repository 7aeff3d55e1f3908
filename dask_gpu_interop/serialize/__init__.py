"""Serializers for what distributed cannot send itself: CUDA torch tensors (and JAX arrays),
and cuDF frames device to device where cuDF's spilling is on.

``register()`` installs them lazily in this process: nothing imports torch or JAX until an
object of theirs is serialized. The package calls it on import (client side); the memory
plugin and the preload call it on workers. Modules: :mod:`.registry` (lazy registration),
:mod:`.header` (checking headers against frames), :mod:`.dtypes` (the types we send),
:mod:`.placement` (frames and devices), :mod:`.dlpack` (typed views for DLPack consumers),
and one per framework (:mod:`.torch`, :mod:`.jax`, :mod:`.cudf`), imported only when needed.
"""

from .header import HeaderError
from .registry import FRAMEWORKS, register, registered

__all__ = ["FRAMEWORKS", "HeaderError", "register", "registered"]
