"""In-container SDK for training code: resume point, checkpoint interval, SIGTERM checkpointing.

Standard library only: it is imported inside user images that have nothing of aisched's.
"""
