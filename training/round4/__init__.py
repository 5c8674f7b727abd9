"""Round-4 data (neural detector): hand-written fragments and the builder."""
