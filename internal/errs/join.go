package errs

import (
	"errors"
	"fmt"
)

// ProblemsReportedMax bounds how many problems one validation error lists,
// so that bad input of any size gives an error of bounded size.
const ProblemsReportedMax = 16

// JoinBounded joins the first ProblemsReportedMax problems and counts the
// rest. It returns nil for no problems.
func JoinBounded(problems []error) error {
	if len(problems) <= ProblemsReportedMax {
		return errors.Join(problems...)
	}
	shown := make([]error, 0, ProblemsReportedMax+1)
	shown = append(shown, problems[:ProblemsReportedMax]...)
	shown = append(shown, fmt.Errorf("and %d more problems", len(problems)-ProblemsReportedMax))
	return errors.Join(shown...)
}
