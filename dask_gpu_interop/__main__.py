"""``python -m dask_gpu_interop``: the library's commands, as ``dask-gpu-interop`` runs them."""

from .cli import main

if __name__ == "__main__":
    main(prog_name="python -m dask_gpu_interop")
