#pragma once
// The model flags statickv-demo and statickv-serve share: --checkpoint DIR
// or --shape NAME (a named shape with seeded random weights). One home, so
// both programs list the same shapes.

#include <statickv/apps/flags.hpp>
#include <statickv/reference/checkpoint.hpp>

#include <string>

namespace statickv::apps {

inline void add_model_flags(Flags& flags, std::string* checkpoint, std::string* shape) {
  flags.add("--checkpoint DIR", checkpoint,
            "Hugging Face checkpoint (config.json + *.safetensors); default: --shape with seeded "
            "random weights");
  std::string names;
  for (const std::string& name : reference::named_config_names()) {
    names += (names.empty() ? "" : ", ") + name + (name == *shape ? " (default)" : "");
  }
  flags.add_choice("--shape NAME", shape, reference::named_config_names(),
                   "named shape when no checkpoint: " + names);
}

}  // namespace statickv::apps
