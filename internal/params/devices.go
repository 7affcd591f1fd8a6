package params

import (
	"slices"
	"sync"
)

// Device is one entry of the device list (lctl dl): an OSC, an MDC, an
// obdfilter, the OSS service... Status and Refs, if not nil, are read at
// each listing; nil means "UP" and 1.
type Device struct {
	// Type is Lustre's obd type: osc, mdc, lov, lmv, mgc, obdfilter, ost,
	// mdt, mds, mgs, ldlm.
	Type string
	// Name is the device name (nacre-OST0000-osc-ffff8d2a1b3c).
	Name string
	// UUID is the device's uuid column.
	UUID   string
	Status func() string
	Refs   func() int

	index, shares int // guarded by Registry.mu
}

// DeviceInfo is one line of lctl dl.
type DeviceInfo struct {
	Index  int    `json:"index"`
	Status string `json:"status"`
	Type   string `json:"type"`
	Name   string `json:"name"`
	UUID   string `json:"uuid"`
	Refs   int    `json:"refs"`
}

// RegisterDevice adds d to the device list at the lowest free index (as
// Lustre numbers obd devices) and returns the function that removes it.
// A device whose name is listed already is not added twice: the existing
// entry gains a reference, and leaves with its last one.
func (r *Registry) RegisterDevice(d Device) (unregister func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var dev *Device
	for _, o := range r.mu.devs {
		if o.Name == d.Name && o.Type == d.Type {
			dev = o
		}
	}
	if dev == nil {
		dev = &d
		for dev.index = 0; r.mu.devs[dev.index] != nil; dev.index++ {
		}
		r.mu.devs[dev.index] = dev
	}
	dev.shares++
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			if dev.shares--; dev.shares == 0 && r.mu.devs[dev.index] == dev {
				delete(r.mu.devs, dev.index)
			}
		})
	}
}

// Devices returns the device list by index.
func (r *Registry) Devices() []DeviceInfo {
	r.mu.RLock()
	devs := make([]*Device, 0, len(r.mu.devs))
	for _, d := range r.mu.devs {
		devs = append(devs, d)
	}
	infos := make([]DeviceInfo, len(devs))
	for i, d := range devs {
		infos[i] = DeviceInfo{Index: d.index, Status: "UP", Type: d.Type, Name: d.Name, UUID: d.UUID, Refs: 1}
	}
	r.mu.RUnlock()
	// Status and Refs call into the layers: not under the registry's lock.
	for i, d := range devs {
		if d.Status != nil {
			infos[i].Status = d.Status()
		}
		if d.Refs != nil {
			infos[i].Refs = d.Refs()
		}
	}
	slices.SortFunc(infos, func(a, b DeviceInfo) int { return a.Index - b.Index })
	return infos
}
