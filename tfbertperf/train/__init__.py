"""Training: strategy (placement), precision, determinism, the step loop with profiler step markers."""
