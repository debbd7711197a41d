"""Capture KV lifecycle traces from engine KV event streams (vLLM, SGLang) over ZMQ.

``wire`` decodes every encoding vintage of the engines' event batches, ``lifecycle`` maps block
events onto lifecycle events, ``rawfile`` records the frames as received so a capture can be decoded
again, ``checkpoint`` keeps the output a valid trace at every flush and ``subscriber`` runs the
sockets (SUB per publisher, DEALER to the replay ROUTER) with gap detection and filling.
"""

from kvreplay.capture.params import CaptureParams

__all__ = ["CaptureParams"]
