// NCCL, loaded the first time it is used rather than linked.
//
// Why: a process holds one libnccl.so.2. PyTorch from PyPI brings its own
// NCCL (the nvidia-nccl wheel) and binds to whichever libnccl.so.2 is
// already loaded; had libaccord linked the system's, `import accord` before
// `import torch` would give torch an NCCL older or newer than the one it was
// built for ("libtorch_cuda.so: undefined symbol: ncclCommResume"). So
// libaccord has no NCCL dependency; nccl_loader.cc defines the NCCL
// functions accord calls as hidden forwarders (invisible outside libaccord,
// so nobody else binds to them), and the first call loads the library:
//   1. the libnccl.so.2 this process already has (e.g. torch's), if any;
//   2. else the one this build was compiled against (its path is built in);
//   3. else libnccl.so.2 from the loader's search path.
// The calls accord needs are all resolved at that moment; a library that
// lacks one is refused with its name. Without a library every forwarder
// returns ncclSystemError, and ncclGetErrorString says why none loaded.
// Thread-safe: the load happens once.
#pragma once

#include <string>

namespace accord {

struct NcclLibrary {
  bool loaded = false;
  std::string path;   // the file loaded, when loaded
  std::string error;  // why none was, when not
};

// Loads NCCL if it is not loaded yet (steps 1-3 above) and says what was
// loaded. Any thread.
const NcclLibrary& LoadNccl();

}  // namespace accord
