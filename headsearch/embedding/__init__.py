"""A photo becomes one model's vectors: its heads found as the indexer finds them, cut as the indexer cuts them,
embedded by the model (a library's own, checked against the library). The search service, people's reference
photos, the benchmarks and `compare` all take this road."""
