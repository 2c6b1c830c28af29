"""MLPerf LoadGen's deployment scenarios (SingleStream, MultiStream, Server, Offline) over
any backend's prepared step: settings.py (what LoadGen is asked), sut.py (the system under
test, run inside the worker), summary.py (LoadGen's summary as a stored result).

mlperf_loadgen is imported only where a test runs (in workers), never on import here.
"""
