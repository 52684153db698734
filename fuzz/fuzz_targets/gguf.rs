#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| enginespec_fuzz::gguf(data));
