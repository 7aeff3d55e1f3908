"""One RMM memory resource per worker, shared by the GPU frameworks."""

from .config import MemoryConfig
from .errors import GPUMemorySetupError, OptionError
from .oom import GPUOutOfMemoryError
from .plugin import GPUMemoryPlugin
from .report import MemoryReport, memory_report

__all__ = ["GPUMemoryPlugin", "GPUMemorySetupError", "GPUOutOfMemoryError", "MemoryConfig", "MemoryReport", "OptionError",
           "memory_report"]
