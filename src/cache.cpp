// Cache's bodies, compiled once for every translation unit that includes
// cache.hpp (the default build; docs/design.md, "The library's build").
// With STATICKV_HEADER_ONLY each translation unit compiles them inline
// instead and this file is not built.

#ifdef STATICKV_HEADER_ONLY
#error "src/cache.cpp is the compiled core: not built with STATICKV_HEADER_ONLY"
#endif

#define STATICKV_CACHE_FN  // out of line: one definition, here
#include <statickv/cache.hpp>
#include <statickv/detail/cache_impl.hpp>
