"""The graph model: graphs, clusters, their file formats, limits, analytic costs and statistics."""
