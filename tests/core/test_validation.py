"""Input validation: every error names the argument, the row and what was expected."""
import numpy as np
import pytest
import scipy.sparse as sp

from streamrank._validation import (
    check_alpha,
    check_n_features,
    check_qid,
    check_X,
    check_y,
    group_ptr_from_qid,
)


def test_check_X_reports_first_nonfinite_row():
    X = np.zeros((6, 3))
    X[4, 1] = np.nan
    X[5, 0] = np.inf
    with pytest.raises(ValueError, match=r"X contains NaN or infinity at row 4"):
        check_X(X)


def test_check_X_sparse_nonfinite_row_and_column():
    X = sp.csr_matrix(np.array([[0, 1.0], [0, 0], [np.inf, 0]]))
    with pytest.raises(ValueError, match=r"row 2 \(column 0\)"):
        check_X(X)


@pytest.mark.parametrize("fmt", ["coo", "csc", "lil", "dok"])
def test_check_X_converts_other_sparse_formats_to_csr(fmt):
    A = sp.random(5, 4, density=0.5, random_state=0, format=fmt)
    out = check_X(A)
    assert out.format == "csr"
    np.testing.assert_array_equal(out.toarray(), A.toarray())


def test_check_X_rejects_object_and_1d_and_wrong_feature_count():
    with pytest.raises(TypeError, match="X has dtype object"):
        check_X(np.array([[1, "a"]], dtype=object))
    with pytest.raises(ValueError, match="must be 2-D"):
        check_X(np.zeros(3))
    with pytest.raises(ValueError, match="X has 3 features, but 4 were expected"):
        check_X(np.zeros((2, 3)), n_features=4)


def test_check_X_keeps_float32_and_makes_fortran_contiguous():
    X = np.asfortranarray(np.ones((4, 3), dtype=np.float32))
    out = check_X(X)
    assert out.dtype == np.float32 and out.flags.c_contiguous
    Xi = np.arange(6).reshape(3, 2)
    assert check_X(Xi).dtype == np.float64


def test_check_X_accepts_read_only_input():
    X = np.ones((3, 2))
    X.setflags(write=False)
    assert check_X(X) is X


def test_check_y_shapes_and_lengths():
    assert check_y([1, 2, 3], 3).dtype == np.float64
    assert check_y(np.ones((3, 2)), 3).shape == (3, 2)
    with pytest.raises(ValueError, match="y has 2 rows but X has 3"):
        check_y([1, 2], 3)
    with pytest.raises(ValueError, match="y contains NaN or infinity at row 1"):
        check_y([0, np.nan, 1], 3)
    with pytest.raises(ValueError, match=r"shape \(rows,\) or \(rows, outputs\)"):
        check_y(np.ones((3, 1, 1)), 3)
    with pytest.raises(ValueError, match="2 output column"):
        check_y(np.ones((3, 2)), 3, n_outputs=3)


def test_check_qid():
    np.testing.assert_array_equal(check_qid(None, 3), [0, 0, 0])
    np.testing.assert_array_equal(check_qid([1.0, 1.0, -2.0], 3), [1, 1, -2])
    with pytest.raises(ValueError, match=r"integer ids; row 1 is 1\.5"):
        check_qid([1.0, 1.5, 2.0], 3)
    with pytest.raises(ValueError, match="qid has 2 rows but X has 3"):
        check_qid([1, 2], 3)
    # issue 18: string ids are query ids too (kept as given); dates are not
    assert list(check_qid(np.array(["a", "b"]), 2)) == ["a", "b"]
    with pytest.raises(TypeError, match="qid has dtype"):
        check_qid(np.array(["2024-01-01", "2024-01-02"], dtype="datetime64[D]"), 2)


def test_group_ptr_from_qid_runs_and_noncontiguous_error():
    gp, gq = group_ptr_from_qid(np.array([7, 7, 3, 3, 3, 9]))
    np.testing.assert_array_equal(gp, [0, 2, 5, 6])
    np.testing.assert_array_equal(gq, [7, 3, 9])
    gp, gq = group_ptr_from_qid(np.array([], dtype=np.int64))
    assert gp.tolist() == [0] and gq.size == 0
    with pytest.raises(ValueError, match="id 7 appears at row 0 and again at row 3"):
        group_ptr_from_qid(np.array([7, 7, 3, 7]))


def test_check_alpha():
    assert check_alpha(2) == 2.0
    for bad in (0, -1.0, np.inf, np.nan):
        with pytest.raises(ValueError, match="alpha must be a finite number > 0"):
            check_alpha(bad)
    with pytest.raises(TypeError):
        check_alpha("1")
    with pytest.raises(TypeError):
        check_alpha(True)


def test_check_n_features_names_both_counts():
    class Est:
        pass

    e = Est()
    check_n_features(e, 5, reset=True)
    check_n_features(e, 5, reset=False)
    with pytest.raises(ValueError, match="X has 4 features, but Est was fitted with 5"):
        check_n_features(e, 4, reset=False)
