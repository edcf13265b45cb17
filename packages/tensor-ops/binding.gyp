{
  "targets": [
    {
      "target_name": "tensor_ops",
      "sources": ["native/tensor_ops.c"],
      "cflags": ["-O3", "-std=gnu99", "-ffp-contract=off", "-fno-fast-math"],
      "xcode_settings": { "OTHER_CFLAGS": ["-O3", "-ffp-contract=off"] }
    }
  ]
}
