package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

func schedulerCommand() *cli.Command {
	return &cli.Command{Name: "scheduler", Usage: "cron entries from .ai/config/schedules.yaml; housekeeping",
		Action: func(c *cli.Context) error { return errors.New("spool scheduler: not available in this build yet") }}
}
