#pragma once
// statickv-serve's closing report on stderr: the cache's bytes, the
// Scheduler's counts and timings, the prefix cache and speculation.

#include "serve/options.hpp"

#include <statickv/engine/scheduler.hpp>

namespace statickv::serve {

void report(const reference::Scheduler& scheduler, const Options& o);

}  // namespace statickv::serve
