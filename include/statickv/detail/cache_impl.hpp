#pragma once
// The bodies of Cache, StaticCache and the memory estimates (cache.hpp
// declares them), one file per job (docs/design.md, "The library's
// build"). Compiled once into the library by src/cache.cpp (the default),
// or, with STATICKV_HEADER_ONLY defined, included by cache.hpp and defined
// inline in every translation unit (the fuzzers' instrumented builds, the
// sanitizer build, the Python extension).

// How each body is declared: inline in the header-only build; src/cache.cpp
// defines it empty.
#ifndef STATICKV_CACHE_FN
#define STATICKV_CACHE_FN inline
#endif

#include <statickv/detail/cache_build.hpp>   // constructor, layer types, estimates
#include <statickv/detail/cache_checks.hpp>  // every entry point's checks
#include <statickv/detail/cache_rows.hpp>    // row operations, inspection
#include <statickv/detail/cache_step.hpp>    // prepare, update, attend
