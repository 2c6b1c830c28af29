"""Running repetitions: the worker process and the executors that start it."""
