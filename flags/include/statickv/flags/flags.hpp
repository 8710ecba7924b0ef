#pragma once
// What a statickv program's main includes for its command line: the
// torch-free flag parser (parser.hpp: Flags, FlagError, number and list
// parsing) and LibTorch's values read from flags (torch_values.hpp:
// devices, dtypes, threads, fail()). Both are compiled into the CMake
// targets statickv_flag_parser and statickv_flags (flags/CMakeLists.txt);
// the statickv library never includes them. Rules of the apps alone
// (--kv-dtype, --offload) are apps/include/statickv/apps/storage_flags.hpp.

#include <statickv/flags/parser.hpp>
#include <statickv/flags/torch_values.hpp>
