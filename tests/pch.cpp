// The source that builds the tests' precompiled header (tests/CMakeLists.txt:
// statickv_test_pch); every test executable reuses it.
