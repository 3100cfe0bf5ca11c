package vk

import (
	"errors"
	"fmt"
)

// Result is a VkResult.
type Result int32

// String is the name Vulkan gives the result ("VK_ERROR_DEVICE_LOST"), or the
// number for a value newer than our table.
func (r Result) String() string {
	if name, ok := resultNames[r]; ok {
		return name
	}
	return fmt.Sprintf("VkResult(%d)", int32(r))
}

// Error is a failed Vulkan call: "vk: vkCreateDevice: VK_ERROR_INITIALIZATION_FAILED".
type Error struct {
	Call   string // the Vulkan function, "vkCreateDevice"
	Result Result
}

func (e *Error) Error() string { return "vk: " + e.Call + ": " + e.Result.String() }

// ErrNoVulkan is wrapped by every error that means Vulkan cannot be used on
// this machine at all (no loader, built without cgo, no device), so a caller
// can fall back to the CPU: errors.Is(err, vk.ErrNoVulkan).
var ErrNoVulkan = errors.New("no usable Vulkan")

// result turns a VkResult into nil or an *Error naming the call.
func result(call string, r Result) error {
	if r == 0 {
		return nil
	}
	return &Error{Call: call, Result: r}
}
