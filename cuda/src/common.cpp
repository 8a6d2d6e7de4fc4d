// What the CUDA backend and the no-CUDA stub share: ownership plumbing and UUID text.
#include <cstdio>
#include <utility>

#include "kvpool/cuda/device.hpp"

namespace kvpool::cuda {

std::string uuid_string(const DeviceUuid& u) {
  char buf[48];
  std::snprintf(buf, sizeof(buf),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                u[14], u[15]);
  return buf;
}

DeviceSlab::~DeviceSlab() { release(); }
DeviceSlab::DeviceSlab(DeviceSlab&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      device_(std::exchange(o.device_, -1)),
      uuid_(o.uuid_) {}
DeviceSlab& DeviceSlab::operator=(DeviceSlab&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    device_ = std::exchange(o.device_, -1);
    uuid_ = o.uuid_;
  }
  return *this;
}

DeviceMapping::~DeviceMapping() { release(); }
DeviceMapping::DeviceMapping(DeviceMapping&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      device_(std::exchange(o.device_, -1)) {}
DeviceMapping& DeviceMapping::operator=(DeviceMapping&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    device_ = std::exchange(o.device_, -1);
  }
  return *this;
}

HostRegistration::~HostRegistration() { release(); }
HostRegistration::HostRegistration(HostRegistration&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)) {}
HostRegistration& HostRegistration::operator=(HostRegistration&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
  }
  return *this;
}

}  // namespace kvpool::cuda
