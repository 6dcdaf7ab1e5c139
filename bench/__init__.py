"""What a maintainer runs beside the package: recording, picking and calibrating the samples, the
results tables and the simulator's validation, and the app's and the command line's benchmarks.

Each module is a script run from the repository root as a module, so that `bench` and the checkout's
`vmexplorer` are imported from it and the scripts import each other as a package:

    python -m bench.<name> [--help]

The regeneration runs in this order: bench.gpu.record_samples (on the GPU, a pass at a time) ->
bench.pick_samples -> bench.reduce_passes -> bench.calibrate_samples -> bench.results_table ->
bench.validate_simulator. The GPU-side scripts are in bench.gpu; what they and these measured is in
bench/results/. Closed investigations are not here: notes/ keeps them.
"""
