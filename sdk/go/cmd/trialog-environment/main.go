// Command trialog-environment serves environment implementations of a Trialog spec from Go.
//
//	trialog-environment --schemas schemas --serve go_rps=rps
//
// Each --serve IMPL=ENV hosts the trials of the spec's (external) environment IMPL with
// one of the example environments, as the consumer group env.IMPL. Connection: --brokers
// or TRIALOG_BOOTSTRAP_SERVERS, --topic-prefix or TRIALOG_TOPIC_PREFIX; keys: --keyring
// or TRIALOG_KEYRING (a keyring file or folder), else the TRIALOG_KEY_* variables, else
// the development keyring for a broker on this machine.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/trialog/trialog/sdk/go/examples"
	"github.com/trialog/trialog/sdk/go/trialog"
)

func main() {
	f := trialog.ConfigFromFlags(flag.CommandLine,
		"keyring file or folder (default: the TRIALOG_KEY_* variables, else the development keyring for a local broker)",
		"IMPL=ENV: host the trials of environment implementation IMPL with ENV (repeatable)")
	flag.Parse()
	if len(f.Serve) == 0 {
		fmt.Fprintf(os.Stderr, "trialog-environment: nothing to serve: pass --serve IMPL=ENV (environments: %s)\n", trialog.Choices(examples.Environments))
		os.Exit(2)
	}
	store, err := trialog.LoadDir(f.Schemas)
	if err != nil {
		log.Fatalf("trialog-environment: %v", err)
	}
	keys, err := trialog.LoadKeyring(f.Keyring, f.BrokerList())
	if err != nil {
		log.Fatalf("trialog-environment: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	services := trialog.NewServiceGroup(ctx, stop, "trialog-environment")
	for _, s := range f.Serve {
		impl, factory, err := trialog.ServeChoice(s, "ENV", examples.Environments)
		if err != nil {
			log.Fatalf("trialog-environment: %v", err)
		}
		cfg := trialog.EnvironmentConfig{Brokers: f.BrokerList(), TopicPrefix: f.TopicPrefix, Implementation: impl,
			Store: store, Keyring: keys, NewEnvironment: factory}
		services.Go(impl, func(ctx context.Context) error { return trialog.ServeEnvironment(ctx, cfg) })
	}
	services.Wait()
}
