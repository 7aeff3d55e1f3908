"""Serializers for what distributed cannot send itself (CUDA torch tensors first)."""
