"""The scripts that need a CUDA GPU (CuPy, and PyTorch as the reference): recording the sample sessions'
passes, the engine's benchmarks against PyTorch and the collectors' cost, and the profiles.

Run on the GPU machine from the repository root, as modules:

    python3 -m bench.gpu.<name> [--help]

`bench/gpu/record_passes.sh` runs the recording passes (bench.gpu.record_samples) and the GPU tests side
by side, one job per GPU. The modules import CuPy and PyTorch inside their functions, so importing one
needs no GPU.
"""
