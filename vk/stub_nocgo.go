//go:build !cgo

package vk

import "fmt"

// Without cgo there is no way to call Vulkan: every entry point says so, and
// the types exist so that callers still compile (and fall back to the CPU).

var errNoCgo = fmt.Errorf("vk: modrun was built without cgo (CGO_ENABLED=0), so it cannot call Vulkan: %w", ErrNoVulkan)

// Load reports that this build cannot use Vulkan.
func Load() error { return errNoCgo }

// LoaderVersion reports that this build cannot use Vulkan.
func LoaderVersion() (Version, error) { return 0, errNoCgo }

// HasValidationLayer is false without cgo.
func HasValidationLayer() bool { return false }

func hasSyncValidation() bool { return false }

// NewInstance reports that this build cannot use Vulkan.
func NewInstance(InstanceOptions) (*Instance, error) { return nil, errNoCgo }

func (in *Instance) ValidationMessages() []string               { return nil }
func (in *Instance) Close()                                     {}
func (in *Instance) Devices() ([]DeviceInfo, error)             { return nil, errNoCgo }
func (in *Instance) NewDevice(DeviceInfo) (*Device, error)      { return nil, errNoCgo }
func (d *Device) Close()                                        {}
func (d *Device) WaitIdle() error                               { return errNoCgo }
func (d *Device) NewBuffer(uint64, BufferKind) (*Buffer, error) { return nil, errNoCgo }
func (d *Device) NewKernel([]byte, KernelSpec) (*Kernel, error) { return nil, errNoCgo }
func (d *Device) Run(*Recorder) error                           { return errNoCgo }
func (b *Buffer) Close()                                        {}
func (b *Buffer) Upload([]byte, uint64) error                   { return errNoCgo }
func (b *Buffer) Download([]byte, uint64) error                 { return errNoCgo }
func (k *Kernel) Close()                                        {}
func (r *Recorder) Close()                                      {}

// Statistics reports that this build cannot use Vulkan.
func (k *Kernel) Statistics() ([]KernelStatistic, error) { return nil, errNoCgo }
