"""The knowledge base's read side: chunking (embedders, publish and search to follow)."""
