"""One RMM memory resource per worker, shared by the GPU frameworks."""

from .config import MemoryConfig, OptionError
from .errors import GPUMemorySetupError
from .oom import GPUOutOfMemoryError
from .plugin import GPUMemoryPlugin
from .report import MemoryReport, memory_report

__all__ = ["GPUMemoryPlugin", "GPUMemorySetupError", "GPUOutOfMemoryError", "MemoryConfig", "MemoryReport", "OptionError",
           "memory_report"]
