"""What a repetition does with a prepared backend step: one scenario each, behind one
contract (base.py), found by name in registry.py.

timed_loop.py is stackcost's own timed loop; loadgen.py runs MLPerf LoadGen's
SingleStream, MultiStream, Server and Offline (settings.py: what LoadGen is asked, each
scenario's differences as data; sut.py: the system under test; summary.py: LoadGen's
summary as a stored result); train.py runs training's epochs. subject.py is what the
inference scenarios measure: the model, its inputs and eager's reference outputs.

mlperf_loadgen and torch are imported only where a repetition runs (in workers), never
on import here.
"""
