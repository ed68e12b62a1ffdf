"""The experiments: reproduce/ (the seeds' claims), benchmarks/ (speed, scale, fidelity), ablations/ (the design
choices the docs cite), common/ (what several share). Each script runs as `python -m experiments.<folder>.<name>`;
the index is experiments/README.md."""
