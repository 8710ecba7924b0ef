#pragma once
// scheduler.hpp under its earlier name, kept so existing code compiles.
#include <statickv/reference/scheduler.hpp>
