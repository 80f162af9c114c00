"""fastmace-oeq-ext: OEq's JIT host extension prebuilt for one torch (compile, link, assemble, gate, consumer)."""
