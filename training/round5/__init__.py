"""Round-5 data (neural detector): hand-written goal-hijack injections, hard benign look-alikes, builder."""
