"""ECG heartbeat outliers: CSV -> Ricker/FFT segmentation -> beat embedding -> VAE, on Dask.

On GPUs the steps run on cuDF -> CuPy -> Numba (CUDA) -> PyTorch and hand data to each other
without copies; on CPUs the same steps run on pandas -> NumPy -> Numba -> PyTorch (CPU).
Nothing here imports a GPU library, Numba or PyTorch until a step needs it.

    from examples.ecg import make_ecg, run, evaluate
    ecg = make_ecg(1200, 250)                 # 20 minutes, with known abnormal beats
    result = run(ecg.signal, ecg.rate)        # or run("recording.csv", 360, device="gpu")
    evaluate(result, ecg)                     # detection F1, outlier ROC AUC
"""

from .params import Params
from .pipeline import ECGResult, evaluate, find_beats, run
from .synthetic import SyntheticECG, make_ecg, write_csv

__all__ = ["ECGResult", "Params", "SyntheticECG", "evaluate", "find_beats", "make_ecg", "run",
           "write_csv"]
