#include "validate/cuda/green_contexts.hpp"

#include <dlfcn.h>

#include <cuda.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

namespace pipegrid::cuda {
namespace {

// Green contexts arrived in the driver API with CUDA 12.4.
constexpr int kFirstGreenContextDriver = 12040;

/// The driver entry points this file uses, resolved once through
/// cuGetProcAddress at the version of the cuda.h it was compiled against.
struct Driver {
  decltype(&::cuGetErrorString) get_error_string = nullptr;
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuDriverGetVersion) driver_get_version = nullptr;
  decltype(&::cuDeviceGetCount) device_get_count = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceGetName) device_get_name = nullptr;
  decltype(&::cuDeviceGetDevResource) device_get_dev_resource = nullptr;
  decltype(&::cuDevSmResourceSplitByCount) dev_sm_resource_split_by_count = nullptr;
  decltype(&::cuDevResourceGenerateDesc) dev_resource_generate_desc = nullptr;
  decltype(&::cuGreenCtxCreate) green_ctx_create = nullptr;
  decltype(&::cuGreenCtxDestroy) green_ctx_destroy = nullptr;
  decltype(&::cuGreenCtxStreamCreate) green_ctx_stream_create = nullptr;
  decltype(&::cuStreamDestroy) stream_destroy = nullptr;
};

Driver load_driver() {
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    throw DeviceError(fmt::format("no CUDA driver on this machine (libcuda.so.1: {})", why ? why : "not found"));
  }
  // The header maps cuGetProcAddress to its _v2 form (with a status output).
  auto get_proc_address = reinterpret_cast<decltype(&::cuGetProcAddress)>(dlsym(library, "cuGetProcAddress_v2"));
  if (get_proc_address == nullptr)
    throw DeviceError(fmt::format("the CUDA driver is older than 12.0 (no cuGetProcAddress_v2); green contexts need {}.{}",
                                  kFirstGreenContextDriver / 1000, kFirstGreenContextDriver % 1000 / 10));
  Driver driver;
  const auto resolve = [&](const char* symbol, auto& pointer) {
    void* function = nullptr;
    CUdriverProcAddressQueryResult status{};
    const CUresult result = get_proc_address(symbol, &function, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (result != CUDA_SUCCESS || function == nullptr || status != CU_GET_PROC_ADDRESS_SUCCESS)
      throw DeviceError(fmt::format("the CUDA driver has no {} (green contexts need a driver for CUDA {}.{} or later)", symbol,
                                    kFirstGreenContextDriver / 1000, kFirstGreenContextDriver % 1000 / 10));
    pointer = reinterpret_cast<std::remove_reference_t<decltype(pointer)>>(function);
  };
  resolve("cuGetErrorString", driver.get_error_string);
  resolve("cuInit", driver.init);
  resolve("cuDriverGetVersion", driver.driver_get_version);
  resolve("cuDeviceGetCount", driver.device_get_count);
  resolve("cuDeviceGet", driver.device_get);
  resolve("cuDeviceGetName", driver.device_get_name);
  resolve("cuDeviceGetDevResource", driver.device_get_dev_resource);
  resolve("cuDevSmResourceSplitByCount", driver.dev_sm_resource_split_by_count);
  resolve("cuDevResourceGenerateDesc", driver.dev_resource_generate_desc);
  resolve("cuGreenCtxCreate", driver.green_ctx_create);
  resolve("cuGreenCtxDestroy", driver.green_ctx_destroy);
  resolve("cuGreenCtxStreamCreate", driver.green_ctx_stream_create);
  resolve("cuStreamDestroy", driver.stream_destroy);
  return driver;
}

/// The driver, loaded on first use; a failed load is retried (and reported)
/// on the next call.
const Driver& driver() {
  static const Driver loaded = load_driver();
  return loaded;
}

void check(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return;
  const char* text = nullptr;
  if (driver().get_error_string(result, &text) != CUDA_SUCCESS || text == nullptr) text = "unknown error";
  throw DeviceError(fmt::format("{}: {} (CUresult {})", what, text, static_cast<int>(result)));
}

struct Device {
  CUdevice handle{};
  DeviceDescription description;
  CUdevResource sms{};
};

Device open_device(int ordinal) {
  const Driver& d = driver();
  check(d.init(0), "cuInit");
  Device device;
  device.description.ordinal = ordinal;
  check(d.driver_get_version(&device.description.driver_version), "cuDriverGetVersion");
  if (device.description.driver_version < kFirstGreenContextDriver)
    throw DeviceError(fmt::format("the CUDA driver is version {}.{}; green contexts need {}.{} or later",
                                  device.description.driver_version / 1000, device.description.driver_version % 1000 / 10,
                                  kFirstGreenContextDriver / 1000, kFirstGreenContextDriver % 1000 / 10));
  int count = 0;
  check(d.device_get_count(&count), "cuDeviceGetCount");
  if (count == 0) throw DeviceError("the CUDA driver sees no device");
  if (ordinal < 0 || ordinal >= count)
    throw DeviceError(fmt::format("CUDA device {}: expected 0..{} ({} devices)", ordinal, count - 1, count));
  check(d.device_get(&device.handle, ordinal), "cuDeviceGet");
  char name[256] = {};
  check(d.device_get_name(name, sizeof name, device.handle), "cuDeviceGetName");
  device.description.name = name;
  check(d.device_get_dev_resource(device.handle, &device.sms, CU_DEV_RESOURCE_TYPE_SM), "cuDeviceGetDevResource");
  device.description.sm_count = static_cast<int>(device.sms.sm.smCount);
#if CUDA_VERSION >= 13000
  device.description.min_partition_sms = static_cast<int>(device.sms.sm.minSmPartitionSize);
  device.description.partition_alignment = static_cast<int>(device.sms.sm.smCoscheduledAlignment);
#else
  // CUDA 12 documents SM groups in multiples of 8 on compute capability 9.0
  // (2 before); 8 is safe on both.
  device.description.min_partition_sms = 8;
  device.description.partition_alignment = 8;
#endif
  return device;
}

}  // namespace

DeviceDescription describe_device(int ordinal) { return open_device(ordinal).description; }

int partition_sm_count(int sm_count, int count, int minimum, int alignment) {
  if (count < 1) throw std::invalid_argument(fmt::format("SM partitions: expected a count >= 1, found {}", count));
  const int step = alignment > 0 ? alignment : 1;
  const int size = sm_count / count / step * step;
  if (size < 1 || size < minimum)
    throw DeviceError(fmt::format("a device of {} SMs cannot give {} partitions of at least {} SMs in multiples of {} "
                                  "(at most {})",
                                  sm_count, count, std::max(minimum, 1), step, sm_count / std::max({minimum, step, 1})));
  return size;
}

GreenContextPartitions::GreenContextPartitions(int ordinal, int count) {
  if (count < 1) throw std::invalid_argument(fmt::format("SM partitions: expected a count >= 1, found {}", count));
  Device opened = open_device(ordinal);
  device_ = opened.description;
  const int size = partition_sm_count(device_.sm_count, count, device_.min_partition_sms, device_.partition_alignment);
  const Driver& d = driver();
  std::vector<CUdevResource> groups(static_cast<std::size_t>(count));
  unsigned int made = static_cast<unsigned int>(count);
  CUdevResource remaining{};
  check(d.dev_sm_resource_split_by_count(groups.data(), &made, &opened.sms, &remaining, 0, static_cast<unsigned int>(size)),
        "cuDevSmResourceSplitByCount");
  if (made < static_cast<unsigned int>(count))
    throw DeviceError(fmt::format("{} ({} SMs): the driver made {} partitions of {} SMs, {} were asked for", device_.name,
                                  device_.sm_count, made, size, count));
  try {
    for (int i = 0; i < count; ++i) {
      CUdevResourceDesc description{};
      check(d.dev_resource_generate_desc(&description, &groups[static_cast<std::size_t>(i)], 1), "cuDevResourceGenerateDesc");
      SmPartition partition;
      partition.index = i;
      partition.sm_count = static_cast<int>(groups[static_cast<std::size_t>(i)].sm.smCount);
      CUgreenCtx context{};
      check(d.green_ctx_create(&context, description, opened.handle, CU_GREEN_CTX_DEFAULT_STREAM), "cuGreenCtxCreate");
      partition.green_context = context;
      partitions_.push_back(partition);
      CUstream stream{};
      check(d.green_ctx_stream_create(&stream, context, CU_STREAM_NON_BLOCKING, 0), "cuGreenCtxStreamCreate");
      partitions_.back().stream = stream;
    }
  } catch (...) {
    release();
    throw;
  }
}

GreenContextPartitions::~GreenContextPartitions() { release(); }

void GreenContextPartitions::release() noexcept {
  // Streams before their contexts; errors at teardown are not reportable.
  for (SmPartition& partition : partitions_) {
    if (partition.stream) driver().stream_destroy(static_cast<CUstream>(partition.stream));
    if (partition.green_context) driver().green_ctx_destroy(static_cast<CUgreenCtx>(partition.green_context));
    partition.stream = partition.green_context = nullptr;
  }
  partitions_.clear();
}

}  // namespace pipegrid::cuda
