"""What runs inside Triton: the Python-backend models' runners, the long-text pipeline
(``long_text``), admission, pacing, chunk limits, the stage runners over ONNX Runtime, and metrics.
It imports the text front-ends, the contract and the client, all below it."""
