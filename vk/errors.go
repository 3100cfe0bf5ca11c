package vk

import (
	"errors"
	"fmt"
	"sync"
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

// The results that callers tell apart.
const (
	Success                Result = 0
	Timeout                Result = 2
	ErrorOutOfHostMemory   Result = -1
	ErrorOutOfDeviceMemory Result = -2
	ErrorDeviceLost        Result = -4
)

// OutOfMemoryError is NewBuffer's error when the memory is not there: the
// driver's VK_ERROR_OUT_OF_DEVICE_MEMORY (or host memory), or past
// Device.MemoryLimit. It says how much was asked and how much was held.
type OutOfMemoryError struct {
	Kind  BufferKind
	Asked uint64 // the buffer's bytes
	Held  uint64 // bytes held already: of the heap, or under the Limit
	Heap  uint64 // the device-local heap (DeviceInfo.DeviceLocalBytes); 0 if unknown
	Limit uint64 // Device.MemoryLimit; 0 if none
	Err   error  // the Vulkan error
}

func (e *OutOfMemoryError) Error() string {
	room := fmt.Sprintf("the device's memory heap is %s", Bytes(e.Heap))
	if e.Limit > 0 {
		room = fmt.Sprintf("Device.MemoryLimit is %s", Bytes(e.Limit))
	}
	return fmt.Sprintf("vk: out of GPU memory: a %s buffer of %s did not fit (%s, %s of it held already): %v",
		e.Kind, Bytes(e.Asked), room, Bytes(e.Held), e.Err)
}

func (e *OutOfMemoryError) Unwrap() error { return e.Err }

// Bytes is n in the unit that reads best: "512 B", "1.5 KiB", "2.0 GiB".
func Bytes(n uint64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/1024, 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, units[i])
}

// fault is the result InjectFault set for the next submit.
var fault struct {
	sync.Mutex
	r Result
}

// InjectFault makes the next submit of any device fail with r (as a driver
// reports VK_ERROR_DEVICE_LOST or a fence wait VK_TIMEOUT) without running
// it: for tests of what the layers above do with a fault a real device
// cannot be made to produce on demand.
func InjectFault(r Result) {
	fault.Lock()
	defer fault.Unlock()
	fault.r = r
}

// takeFault returns and clears the injected fault (Success when none), with
// the call it stands for.
func takeFault() (Result, string) {
	fault.Lock()
	defer fault.Unlock()
	r := fault.r
	fault.r = Success
	return r, "vkWaitForFences (injected)"
}
