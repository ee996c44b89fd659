"""The benchmark's modes, one module each; runner.Bench runs them in order."""
