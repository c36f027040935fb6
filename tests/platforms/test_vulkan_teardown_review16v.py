"""A Vulkan driver that hangs or crashes in its teardown (vkDestroyInstance, or as the process exits) after the
probe listed its devices: the list is the answer, with a note; a hang before the list stays a failure.

The driver is a real ICD, built here with the C compiler (no NVIDIA driver can exist here, and lavapipe tears
down cleanly): the real Vulkan loader loads it from a manifest VK_DRIVER_FILES names, the real probe runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile

import pytest

from renderd.platforms import vulkan

#: A minimal Vulkan ICD (loader interface 5) with one device; STANDIN_VK_MODE picks where it misbehaves.
ICD_SOURCE = r"""
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int32_t VkResult;
typedef void (*PFN_vkVoidFunction)(void);
typedef struct { uintptr_t loader_data; } Dispatchable;  /* the loader writes its dispatch pointer here */
static Dispatchable the_instance = {0x01CDC0DE};
static Dispatchable the_device = {0x01CDC0DE};

static void misbehave(const char *where) {
    const char *mode = getenv("STANDIN_VK_MODE");
    if (mode == NULL || strncmp(mode, where, strlen(where)) != 0 || mode[strlen(where)] != ':') return;
    if (strcmp(mode + strlen(where) + 1, "hang") == 0) for (;;) pause();
    raise(SIGSEGV);
}

static VkResult create_instance(const void *info, const void *alloc, void **instance) {
    *instance = &the_instance;
    return 0;
}
static void destroy_instance(void *instance, const void *alloc) { misbehave("destroy"); }
static VkResult instance_extensions(const char *layer, uint32_t *count, void *props) { *count = 0; return 0; }
static VkResult device_extensions(void *dev, const char *layer, uint32_t *count, void *props) {
    *count = 0;
    return 0;
}
static VkResult enumerate_devices(void *instance, uint32_t *count, void **devices) {
    misbehave("enumerate");
    if (devices == NULL) { *count = 1; return 0; }
    if (*count < 1) return 5; /* VK_INCOMPLETE */
    devices[0] = &the_device;
    *count = 1;
    return 0;
}
static void device_properties(void *dev, uint8_t *props) {
    uint32_t api = 1u << 22, vendor = 0x10DE, device = 0x1234, type = 2; /* 1.0.0, DISCRETE_GPU */
    memset(props, 0, 824); /* sizeof(VkPhysicalDeviceProperties) */
    memcpy(props + 0, &api, 4);
    memcpy(props + 8, &vendor, 4);
    memcpy(props + 12, &device, 4);
    memcpy(props + 16, &type, 4);
    strcpy((char *)props + 20, "renderd stand-in GPU");
}

/* The other core 1.0 entry points the loader requires of a driver; never called by the probe. */
static VkResult unsupported(void) { return -3; /* VK_ERROR_INITIALIZATION_FAILED */ }
static const char *const required[] = {
    "vkGetPhysicalDeviceFeatures", "vkGetPhysicalDeviceFormatProperties",
    "vkGetPhysicalDeviceImageFormatProperties", "vkGetPhysicalDeviceQueueFamilyProperties",
    "vkGetPhysicalDeviceMemoryProperties", "vkGetPhysicalDeviceSparseImageFormatProperties", "vkCreateDevice",
    "vkGetDeviceProcAddr", "vkEnumerateDeviceLayerProperties",
};

__attribute__((visibility("default"))) VkResult vk_icdNegotiateLoaderICDInterfaceVersion(uint32_t *version) {
    if (*version > 5) *version = 5;
    return 0;
}
__attribute__((visibility("default"))) PFN_vkVoidFunction vk_icdGetInstanceProcAddr(void *instance, const char *name) {
    static const struct { const char *name; PFN_vkVoidFunction fn; } table[] = {
        {"vkCreateInstance", (PFN_vkVoidFunction)create_instance},
        {"vkDestroyInstance", (PFN_vkVoidFunction)destroy_instance},
        {"vkEnumerateInstanceExtensionProperties", (PFN_vkVoidFunction)instance_extensions},
        {"vkEnumerateDeviceExtensionProperties", (PFN_vkVoidFunction)device_extensions},
        {"vkEnumeratePhysicalDevices", (PFN_vkVoidFunction)enumerate_devices},
        {"vkGetPhysicalDeviceProperties", (PFN_vkVoidFunction)device_properties},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(name, table[i].name) == 0) return table[i].fn;
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        if (strcmp(name, required[i]) == 0) return (PFN_vkVoidFunction)unsupported;
    return NULL;
}

/* Linked with -z nodelete (the loader's dlclose leaves it loaded): runs as the process exits. */
__attribute__((destructor)) static void unloaded(void) { misbehave("exit"); }
"""

#: The deadline given to the probe here: the stand-in answers in well under a second; a hang costs all of it.
DEADLINE = 2.0


@pytest.fixture(scope="module")
def standin_icd():
    """The environment that makes the loader load only the stand-in driver (mode set per test)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the stand-in Vulkan driver")
    with tempfile.TemporaryDirectory(prefix="renderd-vk-standin-") as tmp:
        source = os.path.join(tmp, "standin_icd.c")
        library = os.path.join(tmp, "libstandin_icd.so")
        with open(source, "w", encoding="utf-8") as f:
            f.write(ICD_SOURCE)
        build = [compiler, "-shared", "-fPIC", "-O1", "-Wl,-z,nodelete", "-o", library, source]
        subprocess.run(build, check=True, timeout=60)
        manifest = os.path.join(tmp, "standin_icd.json")
        with open(manifest, "w", encoding="utf-8") as f:
            json.dump({"file_format_version": "1.0.0", "ICD": {"library_path": library, "api_version": "1.0.0"}}, f)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VK_", "STANDIN_"))}
        env["VK_DRIVER_FILES"] = manifest
        yield env


def probe(env: dict[str, str], mode: str) -> vulkan.VulkanProbe:
    return vulkan.probe_vulkan({**env, "STANDIN_VK_MODE": mode}, timeout=DEADLINE, use_cache=False)


def test_a_clean_stand_in_lists_its_device_without_notes(standin_icd):
    result = probe(standin_icd, "")
    assert result.ok, result.error
    assert [(d.name, d.type) for d in result.devices] == [("renderd stand-in GPU", "DISCRETE_GPU")]
    assert result.notes == []


def test_a_hang_in_vkdestroyinstance_keeps_the_device_list(standin_icd):
    result = probe(standin_icd, "destroy:hang")
    assert result.ok, result.error
    assert [d.name for d in result.devices] == ["renderd stand-in GPU"]
    (note,) = result.notes
    assert "hung in vkDestroyInstance" in note and f"{DEADLINE:g} s deadline" in note, note
    assert "device list it gave before is used" in note and "fix:" in note, note


def test_a_crash_in_vkdestroyinstance_keeps_the_device_list(standin_icd):
    result = probe(standin_icd, "destroy:crash")
    assert result.ok, result.error
    assert [d.name for d in result.devices] == ["renderd stand-in GPU"]
    (note,) = result.notes
    assert "crashed in vkDestroyInstance" in note and "SIGSEGV" in note, note


def test_a_crash_as_the_probe_exits_keeps_the_device_list(standin_icd):
    result = probe(standin_icd, "exit:crash")
    assert result.ok, result.error
    assert [d.name for d in result.devices] == ["renderd stand-in GPU"]
    (note,) = result.notes
    assert "crashed as the probe exited" in note and "SIGSEGV" in note, note


def test_a_hang_before_the_device_list_is_still_a_failure(standin_icd):
    result = probe(standin_icd, "enumerate:hang")
    assert not result.ok and result.devices == []
    assert "in vkEnumeratePhysicalDevices" in result.error, result.error
    assert f"did not finish within {DEADLINE:g} s" in result.error, result.error
