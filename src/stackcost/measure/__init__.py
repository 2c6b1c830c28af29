"""The measurement engine: statistics, timers, the warmup/stop protocol, memory."""
