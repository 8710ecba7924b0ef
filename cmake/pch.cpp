// The source that builds a shared precompiled header (CMakeLists.txt:
// statickv_pch_library): the targets of a group reuse what it compiles.
