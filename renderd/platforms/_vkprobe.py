"""Vulkan probe, run as a short-lived child process: ``python -I _vkprobe.py`` prints one JSON object.

It loads the Vulkan loader with ctypes, creates an instance, enumerates the physical devices and reads
their names, types and UUIDs. It imports nothing but the standard library and nothing from renderd, so
it runs under ``python -I`` and a driver that crashes or hangs takes only this process down. The parent
(:mod:`renderd.platforms.vulkan`) applies the deadline and turns the output into reasons.

Output: ``{"ok": true, "api_version": "1.3.239", "devices": [{"index", "name", "type", "uuid",
"vendor_id", "device_id", "api_version"}]}`` or ``{"ok": false, "stage": ..., "error": ...}``.

Before each step it prints ``RENDERD-VULKAN-STAGE <step>`` (flushed), so a parent that kills a hung probe
knows where it hung (loading the loader, the drivers' start in ``vkCreateInstance``, ...). The answer is
printed (and flushed) before ``vkDestroyInstance``, followed by the stages ``vkDestroyInstance`` and ``exit``
(after it returned): a driver that hangs or crashes in its teardown leaves a complete answer, and the parent
can tell where the teardown stopped.

The arguments are the driver libraries the ICD manifests name. When ``vkCreateInstance`` fails, or no device
but CPU ones is found, each is opened with ``dlopen`` (the loader has tried them already) and the ones that
cannot be opened are reported as ``"unloadable": {library: dlerror}``: a driver whose manifest is installed
but whose library is missing or broken, which the loader only skips.
"""

from __future__ import annotations

import ctypes
import json
import sys

LOADER_NAMES = ("libvulkan.so.1", "libvulkan.so", "libvulkan.1.dylib", "libMoltenVK.dylib")

VK_SUCCESS = 0
VK_INCOMPLETE = 5
VK_STRUCTURE_TYPE_APPLICATION_INFO = 0
VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO = 1
VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2 = 1000059001
VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES = 1000071004
VK_API_VERSION_1_0 = 1 << 22
VK_API_VERSION_1_1 = (1 << 22) | (1 << 12)

# VkPhysicalDeviceProperties is large (it embeds VkPhysicalDeviceLimits); only its head is read, at
# the offsets fixed by the Vulkan headers, from a buffer comfortably larger than the whole struct.
PROPERTIES_BUFFER_SIZE = 4096
OFFSET_API_VERSION = 0
OFFSET_VENDOR_ID = 8
OFFSET_DEVICE_ID = 12
OFFSET_DEVICE_TYPE = 16
OFFSET_DEVICE_NAME = 20
DEVICE_NAME_SIZE = 256

DEVICE_TYPES = {0: "OTHER", 1: "INTEGRATED_GPU", 2: "DISCRETE_GPU", 3: "VIRTUAL_GPU", 4: "CPU"}

RESULT_NAMES = {
    -1: "VK_ERROR_OUT_OF_HOST_MEMORY",
    -2: "VK_ERROR_OUT_OF_DEVICE_MEMORY",
    -3: "VK_ERROR_INITIALIZATION_FAILED",
    -4: "VK_ERROR_DEVICE_LOST",
    -6: "VK_ERROR_LAYER_NOT_PRESENT",
    -7: "VK_ERROR_EXTENSION_NOT_PRESENT",
    -9: "VK_ERROR_INCOMPATIBLE_DRIVER",
}


class VkApplicationInfo(ctypes.Structure):
    _fields_ = [
        ("sType", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("pApplicationName", ctypes.c_char_p),
        ("applicationVersion", ctypes.c_uint32),
        ("pEngineName", ctypes.c_char_p),
        ("engineVersion", ctypes.c_uint32),
        ("apiVersion", ctypes.c_uint32),
    ]


class VkInstanceCreateInfo(ctypes.Structure):
    _fields_ = [
        ("sType", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("flags", ctypes.c_uint32),
        ("pApplicationInfo", ctypes.POINTER(VkApplicationInfo)),
        ("enabledLayerCount", ctypes.c_uint32),
        ("ppEnabledLayerNames", ctypes.c_void_p),
        ("enabledExtensionCount", ctypes.c_uint32),
        ("ppEnabledExtensionNames", ctypes.c_void_p),
    ]


class VkPhysicalDeviceIDProperties(ctypes.Structure):
    _fields_ = [
        ("sType", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("deviceUUID", ctypes.c_uint8 * 16),
        ("driverUUID", ctypes.c_uint8 * 16),
        ("deviceLUID", ctypes.c_uint8 * 8),
        ("deviceNodeMask", ctypes.c_uint32),
        ("deviceLUIDValid", ctypes.c_uint32),
    ]


class VkPhysicalDeviceProperties2(ctypes.Structure):
    _fields_ = [
        ("sType", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("properties", ctypes.c_uint8 * PROPERTIES_BUFFER_SIZE),
    ]


def _version(v: int) -> str:
    return f"{(v >> 22) & 0x7F}.{(v >> 12) & 0x3FF}.{v & 0xFFF}"


def _uuid(raw: bytes) -> str:
    h = raw.hex()
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _result(code: int) -> str:
    return RESULT_NAMES.get(code, f"VkResult {code}")


def _failed(call: str, result: int, **more: str) -> dict:
    """The output of a probe stopped by ``call`` returning the error ``result`` (``more``: fields after it)."""
    return {"ok": False, "stage": call, "error": f"{call} failed: {_result(result)}", "result": result, **more}


def _load_loader() -> ctypes.CDLL | None:
    for name in LOADER_NAMES:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def _stage(name: str) -> None:
    sys.stdout.write(f"RENDERD-VULKAN-STAGE {name}\n")
    sys.stdout.flush()


def _unloadable(libraries: list[str]) -> dict[str, str]:
    """The driver libraries among ``libraries`` that the dynamic linker cannot open, with its error."""
    _stage("dlopen-drivers")
    failed = {}
    for library in libraries:
        try:
            ctypes.CDLL(library)
        except OSError as exc:
            failed[library] = str(exc)
    return failed


def probe(libraries: list[str] | None = None) -> dict:
    libraries = list(libraries or [])
    _stage("loader")
    lib = _load_loader()
    if lib is None:
        return {"ok": False, "stage": "loader", "error": "the Vulkan loader (libvulkan.so.1) was not found"}

    instance_version = VK_API_VERSION_1_0
    enumerate_version = getattr(lib, "vkEnumerateInstanceVersion", None)
    if enumerate_version is not None:
        value = ctypes.c_uint32(0)
        enumerate_version.restype = ctypes.c_int32
        if enumerate_version(ctypes.byref(value)) == VK_SUCCESS:
            instance_version = value.value
    api = VK_API_VERSION_1_1 if instance_version >= VK_API_VERSION_1_1 else VK_API_VERSION_1_0

    app = VkApplicationInfo(
        VK_STRUCTURE_TYPE_APPLICATION_INFO, None, b"renderd-probe", 1, b"renderd", 1, api
    )
    create_info = VkInstanceCreateInfo(
        VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, None, 0, ctypes.pointer(app), 0, None, 0, None
    )
    instance = ctypes.c_void_p()
    lib.vkCreateInstance.restype = ctypes.c_int32
    lib.vkCreateInstance.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    _stage("vkCreateInstance")
    result = lib.vkCreateInstance(ctypes.byref(create_info), None, ctypes.byref(instance))
    if result != VK_SUCCESS:
        return _failed(
            "vkCreateInstance", result, api_version=_version(instance_version), unloadable=_unloadable(libraries)
        )
    try:
        outcome = _listed(lib, instance, api, instance_version, libraries)
    except Exception as exc:  # (reported, as main() does, before the instance is destroyed)
        outcome = {"ok": False, "stage": "probe", "error": f"{type(exc).__name__}: {exc}"}
    # The answer goes out before the teardown: a driver that hangs or crashes in vkDestroyInstance (or as the
    # process exits) does not take the device list with it.
    report(outcome)
    _stage("vkDestroyInstance")
    lib.vkDestroyInstance.restype = None
    lib.vkDestroyInstance.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.vkDestroyInstance(instance, None)
    _stage("exit")
    return outcome


def _listed(lib: ctypes.CDLL, instance: ctypes.c_void_p, api: int, instance_version: int, libraries: list[str]) -> dict:
    """The physical devices of ``instance`` (the probe's answer), or why they cannot be listed."""
    lib.vkEnumeratePhysicalDevices.restype = ctypes.c_int32
    lib.vkEnumeratePhysicalDevices.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    count = ctypes.c_uint32(0)
    _stage("vkEnumeratePhysicalDevices")
    result = lib.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), None)
    if result not in (VK_SUCCESS, VK_INCOMPLETE):
        return _failed("vkEnumeratePhysicalDevices", result)
    handles = (ctypes.c_void_p * max(count.value, 1))()
    if count.value:
        result = lib.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), handles)
        if result not in (VK_SUCCESS, VK_INCOMPLETE):
            return _failed("vkEnumeratePhysicalDevices", result)

    get_props2 = None
    if api >= VK_API_VERSION_1_1:
        lib.vkGetInstanceProcAddr.restype = ctypes.c_void_p
        lib.vkGetInstanceProcAddr.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        address = lib.vkGetInstanceProcAddr(instance, b"vkGetPhysicalDeviceProperties2")
        if address:
            get_props2 = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(address)
    lib.vkGetPhysicalDeviceProperties.restype = None
    lib.vkGetPhysicalDeviceProperties.argtypes = [ctypes.c_void_p, ctypes.c_void_p]

    devices = []
    for index in range(count.value):
        _stage(f"device-properties {index}")
        handle = handles[index]
        raw = (ctypes.c_uint8 * PROPERTIES_BUFFER_SIZE)()
        lib.vkGetPhysicalDeviceProperties(handle, raw)
        head = bytes(raw[: OFFSET_DEVICE_NAME + DEVICE_NAME_SIZE])
        device_api = int.from_bytes(head[OFFSET_API_VERSION : OFFSET_API_VERSION + 4], "little")
        uuid = None
        if get_props2 is not None and device_api >= VK_API_VERSION_1_1:
            ids = VkPhysicalDeviceIDProperties(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES, None)
            props2 = VkPhysicalDeviceProperties2(
                VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, ctypes.cast(ctypes.pointer(ids), ctypes.c_void_p)
            )
            get_props2(handle, ctypes.byref(props2))
            uuid = _uuid(bytes(ids.deviceUUID))
        name = head[OFFSET_DEVICE_NAME : OFFSET_DEVICE_NAME + DEVICE_NAME_SIZE].split(b"\0", 1)[0]
        devices.append(
            {
                "index": index,
                "name": name.decode("utf-8", "replace"),
                "type": DEVICE_TYPES.get(
                    int.from_bytes(head[OFFSET_DEVICE_TYPE : OFFSET_DEVICE_TYPE + 4], "little"), "OTHER"
                ),
                "uuid": uuid,
                "vendor_id": int.from_bytes(head[OFFSET_VENDOR_ID : OFFSET_VENDOR_ID + 4], "little"),
                "device_id": int.from_bytes(head[OFFSET_DEVICE_ID : OFFSET_DEVICE_ID + 4], "little"),
                "api_version": _version(device_api),
            }
        )
    outcome = {"ok": True, "api_version": _version(instance_version), "devices": devices}
    if all(d["type"] == "CPU" for d in devices):  # a GPU driver may be installed but not load
        outcome["unloadable"] = _unloadable(libraries)
    return outcome


_reported = False


def report(outcome: dict) -> None:
    """Print the answer (once: the first is the answer) and flush it, so that it reaches the parent even if
    the driver then hangs or crashes. The marker separates it from anything a driver prints on stdout."""
    global _reported
    if _reported:
        return
    _reported = True
    sys.stdout.write("RENDERD-VULKAN-PROBE " + json.dumps(outcome) + "\n")
    sys.stdout.flush()


def main() -> int:
    try:
        outcome = probe(sys.argv[1:])
    except Exception as exc:  # report anything ctypes raises instead of a traceback
        outcome = {"ok": False, "stage": "probe", "error": f"{type(exc).__name__}: {exc}"}
    report(outcome)  # (an answer probe() printed before the teardown stays the answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
