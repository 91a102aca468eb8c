"""Trainable attention models (linear, softmax, whitened; heads; depth)."""
