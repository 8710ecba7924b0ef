// The one TU that includes c10d's ProcessGroupGloo.hpp, and so Debian's Gloo
// headers: it calls only what depends on no Gloo class layout (the
// constructor, the device factories, Options) and hands back the group as a
// c10d::Backend. tp_gloo_symbols checks this object defines no Gloo symbol
// (docs/tensor_parallel.md, "The transport decision").

#include "communicator.hpp"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

namespace statickv::reference::tp {

c10::intrusive_ptr<c10d::Backend> make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                  int64_t rank, int64_t world, bool loopback,
                                                  std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  // Loopback ranks talk over 127.0.0.1 only; across machines, the address
  // this host's name resolves to (GLOO_SOCKET_IFNAME picks an interface).
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && !loopback) {
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  } else if (loopback) {
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  } else {
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  options->threads = 1;  // one collective at a time: the decoder issues them in order
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, static_cast<int>(rank),
                                                     static_cast<int>(world), options);
}

}  // namespace statickv::reference::tp
