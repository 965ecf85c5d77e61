"""engine-sim's errors and the vLLM-shaped bodies it answers them with."""

from http import HTTPStatus

from prefixroute.engine_model.errors import BadRequest, EngineSimError, NotFound, error_body


def test_the_body_is_vllms_flat_error_object():
    assert error_body("'n' must be an integer", "BadRequestError", 400, "n") == {
        "object": "error",
        "message": "'n' must be an integer",
        "type": "BadRequestError",
        "param": "n",
        "code": 400,
    }
    assert error_body("no", "BadRequestError", 400)["param"] is None


def test_a_bad_request_is_a_400_naming_its_field():
    error = BadRequest("'prompt' is required", "prompt")
    assert (error.status, error.kind, error.message, error.param) == (
        HTTPStatus.BAD_REQUEST,
        "BadRequestError",
        "'prompt' is required",
        "prompt",
    )
    assert str(error) == "'prompt' is required"
    assert isinstance(error, EngineSimError)


def test_an_unknown_model_is_a_404_caught_wherever_a_bad_request_is():
    error = NotFound("The model `x` does not exist.", "model")
    assert (error.status, error.kind, error.param) == (HTTPStatus.NOT_FOUND, "NotFoundError", "model")
    assert isinstance(error, BadRequest)
