#include "device/device.h"

namespace accord {

Status DeviceEvent::Record(DeviceStream& stream) { return RecordNative(stream.native()); }

Status DeviceApi::CheckOrdinal(int ordinal) const {
  const int count = DeviceCount();
  if (ordinal < 0 || ordinal >= count) {
    return Status::InvalidArgument(std::string("cuda:") + std::to_string(ordinal) + " is not a device of this process (" +
                                   name() + " sees " + std::to_string(count) + " device" + (count == 1 ? "" : "s") +
                                   ")");
  }
  return Status::OK();
}

}  // namespace accord
