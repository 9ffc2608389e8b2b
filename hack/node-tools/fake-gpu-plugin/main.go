// Command fake-gpu-plugin advertises GPUs that do not exist over the kubelet's
// device-plugin API (v1beta1), the way NVIDIA's device plugin advertises real
// ones: it serves a DevicePlugin on a socket in the kubelet's device-plugins
// directory and registers it, so that the kubelet puts nvidia.com/gpu into the
// node's capacity, allocates device IDs to containers and keeps that
// accounting across restarts. A container gets NVIDIA_VISIBLE_DEVICES naming
// its devices, as with the real plugin, and no device nodes.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices []*pluginapi.Device
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the devices once: fake devices never turn unhealthy.
func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (p *plugin) Allocate(_ context.Context, request *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	response := &pluginapi.AllocateResponse{}
	for _, container := range request.ContainerRequests {
		response.ContainerResponses = append(response.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(container.DevicesIds, ",")},
		})
	}
	return response, nil
}

func (p *plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// serve listens on socket and registers with the kubelet; it returns when the
// socket is gone, which is what a kubelet restart does to every plugin socket.
func serve(dir, socketName, resource string, p *plugin) error {
	socket := filepath.Join(dir, socketName)
	_ = os.Remove(socket)
	listener, err := net.Listen("unix", socket)
	if err != nil {
		return err
	}
	server := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(server, p)
	go func() { _ = server.Serve(listener) }()
	defer server.Stop()

	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, filepath.Base(pluginapi.KubeletSocket)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: socketName, ResourceName: resource,
	})
	if err != nil {
		return fmt.Errorf("register with the kubelet: %w", err)
	}
	log.Printf("registered %d x %s on %s", len(p.devices), resource, socket)
	for {
		time.Sleep(2 * time.Second)
		if _, err := os.Stat(socket); err != nil {
			return nil
		}
	}
}

func main() {
	count := flag.Int("count", 1, "how many devices to advertise")
	resource := flag.String("resource", "nvidia.com/gpu", "extended resource name")
	dir := flag.String("dir", pluginapi.DevicePluginPath, "the kubelet's device-plugins directory")
	prefix := flag.String("id-prefix", "GPU-fake", "device ID prefix")
	flag.Parse()
	p := &plugin{}
	for i := 0; i < *count; i++ {
		p.devices = append(p.devices, &pluginapi.Device{ID: fmt.Sprintf("%s-%d", *prefix, i), Health: pluginapi.Healthy})
	}
	socketName := "aisched-fake-gpu.sock"
	for {
		if err := serve(*dir, socketName, *resource, p); err != nil {
			// The kubelet may not be listening yet: try again shortly.
			log.Printf("%v; retrying", err)
		}
		time.Sleep(time.Second)
	}
}
