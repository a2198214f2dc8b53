"""Model export (ONNX)."""
