package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

func monitorCommand() *cli.Command {
	return &cli.Command{Name: "monitor", Usage: "asynqmon UI + thread views",
		Action: func(c *cli.Context) error { return errors.New("spool monitor: not available in this build yet") }}
}
