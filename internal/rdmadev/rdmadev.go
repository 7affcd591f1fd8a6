// Package rdmadev finds the node's RDMA devices and the network devices
// behind them, from sysfs through github.com/Mellanox/rdmamap. It only
// reads; the verbs driver (o2iblnd) and `lnetctl net show -v` use it.
package rdmadev

import (
	"net"
	"slices"

	"github.com/Mellanox/rdmamap"
)

// Device is one RDMA device (e.g. mlx5_0) with its network devices.
type Device struct {
	Name       string
	NetDevices []string
}

// List returns the RDMA devices found, sorted by name, each with the network
// interfaces (e.g. ib0, enp65s0f0) whose RDMA device it is. None on a node
// without RDMA hardware.
func List() []Device {
	names := rdmamap.GetRdmaDeviceList()
	slices.Sort(names)
	ifs, _ := net.Interfaces()
	out := make([]Device, 0, len(names))
	for _, n := range names {
		d := Device{Name: n}
		for _, ifc := range ifs {
			if dev, err := rdmamap.GetRdmaDeviceForNetdevice(ifc.Name); err == nil && dev == n {
				d.NetDevices = append(d.NetDevices, ifc.Name)
			}
		}
		out = append(out, d)
	}
	return out
}
