"""Token generation through each runtime's own generation API: one module per runtime,
behind the Generator contract (base.py), named by its backend's `generator` path.
metrics.py holds the one definition of TTFT, TPOT and every token rate.

Runtimes (transformers, onnxruntime-genai, openvino-genai, llama-cpp-python) are imported
only inside methods, in workers."""
